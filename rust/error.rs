//! Errors of the core. Each variant maps to one Python exception type in the
//! binding layer, so messages written here are what users read: name the
//! field and the offending value.

use std::fmt;

/// Which per-class limit a push would exceed (see [`Error::QueueFull`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Maximum number of queued requests.
    Requests,
    /// Maximum number of queued tokens.
    Tokens,
    /// Dynamo's `request_queue_limit_per_worker` (scaled by the workers).
    RequestsPerWorker,
    /// Dynamo's `raw_isl_token_queue_limit_per_worker` (scaled by the workers).
    RawIslTokensPerWorker,
    /// Dynamo's `cached_token_queue_limit_per_worker` (scaled by the workers).
    CachedTokensPerWorker,
}

impl LimitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Requests => "max_queued_requests",
            LimitKind::Tokens => "max_queued_tokens",
            LimitKind::RequestsPerWorker => "request_queue_limit_per_worker",
            LimitKind::RawIslTokensPerWorker => "raw_isl_token_queue_limit_per_worker",
            LimitKind::CachedTokensPerWorker => "cached_token_queue_limit_per_worker",
        }
    }

    /// Whether the limit scales with the number of workers (and is checked
    /// against the usage before the push, as Dynamo does).
    pub fn per_worker(self) -> bool {
        !matches!(self, LimitKind::Requests | LimitKind::Tokens)
    }
}

/// Every fallible core operation returns this. An operation that returns an
/// error leaves its data structure exactly as it was before the call.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// An argument has a bad value (negative cost, NaN, zero quantum...). Python: `ValueError`.
    Value(String),
    /// An argument has the wrong type. Python: `TypeError`.
    Type(String),
    /// Unknown key (class name, request id...). Python: `KeyError`.
    Key(String),
    /// Pop or peek on an empty structure. Python: `IndexError`.
    Index(String),
    /// A push would exceed a configured limit; nothing was enqueued. Python: `fairq.QueueFull`.
    QueueFull {
        class_name: String,
        limit: LimitKind,
        current: u64,
        max: u64,
    },
}

impl Error {
    pub fn value(msg: impl Into<String>) -> Self {
        Error::Value(msg.into())
    }
    pub fn key(msg: impl Into<String>) -> Self {
        Error::Key(msg.into())
    }
    pub fn index(msg: impl Into<String>) -> Self {
        Error::Index(msg.into())
    }
    pub fn type_(msg: impl Into<String>) -> Self {
        Error::Type(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value(m) | Error::Type(m) | Error::Key(m) | Error::Index(m) => f.write_str(m),
            Error::QueueFull {
                class_name,
                limit,
                current,
                max,
            } if limit.per_worker() => write!(
                f,
                "class {class_name:?} is full: {} x workers is {max} and {current} already queued",
                limit.as_str()
            ),
            Error::QueueFull {
                class_name,
                limit,
                current,
                max,
            } => write!(
                f,
                "class {class_name:?} is full: {} is {max} and {current} would be queued",
                limit.as_str()
            ),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Validate that a float is finite and `>= 0`, naming `field` in the error.
pub fn check_non_negative(field: &str, v: f64) -> Result<f64> {
    if v.is_nan() {
        return Err(Error::value(format!(
            "{field} must be a number >= 0, got NaN"
        )));
    }
    if v.is_infinite() || v < 0.0 {
        return Err(Error::value(format!(
            "{field} must be a finite number >= 0, got {v}"
        )));
    }
    Ok(v)
}

/// Validate that a float is finite and `> 0`, naming `field` in the error.
pub fn check_positive(field: &str, v: f64) -> Result<f64> {
    if v.is_nan() {
        return Err(Error::value(format!(
            "{field} must be a number > 0, got NaN"
        )));
    }
    if v.is_infinite() || v <= 0.0 {
        return Err(Error::value(format!(
            "{field} must be a finite number > 0, got {v}"
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_the_field() {
        assert!(check_positive("weight", 0.0)
            .unwrap_err()
            .to_string()
            .contains("weight"));
        assert!(check_non_negative("cost", f64::NAN)
            .unwrap_err()
            .to_string()
            .contains("NaN"));
        assert_eq!(check_positive("w", 2.5), Ok(2.5));
    }
}
