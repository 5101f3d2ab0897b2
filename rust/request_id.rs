//! [`RequestId`]: the one request-id type of every API (local schedulers,
//! dispatchers, the vLLM queues).
//!
//! # The contract (what every binding accepts)
//!
//! A request id is an **integer** or a **string**:
//!
//! * integers: Python `int` (and `int` subclasses) and objects with
//!   `__index__` (numpy integers), within the signed 64-bit range; an
//!   integer out of that range is a `ValueError` naming `request_id`.
//!   `bool` is **rejected** (`TypeError`): `True` would silently be the id
//!   `1`. `5`, `np.int64(5)` and an `IntEnum` member of value 5 are the same
//!   id.
//! * strings: any Python `str`, lone surrogates included (vLLM request ids
//!   are arbitrary strings). The core stores the string's code points as
//!   UTF-8, a lone surrogate encoded as Python's `surrogatepass` does, so the
//!   id round-trips exactly and byte order is code-point order.
//! * anything else (`float`, `None`, `bytes`, ...) is a `TypeError` naming
//!   `request_id`.
//!
//! The Python binding has exactly one parser
//! (`rust/python/request_id.rs`) implementing this; every API uses it, and
//! `tests/test_request_ids.py` checks that the same id gets the same outcome
//! in every API.
//!
//! # Order
//!
//! Where ids are sorted (vLLM's priority queue breaks ties by id), every
//! integer sorts before every string (Python would raise comparing the two;
//! fairq defines it), integers numerically, strings by code point.

use std::fmt;

/// A request id: an integer or a string (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    Int(i64),
    /// The string's code points as UTF-8; a lone surrogate is encoded as
    /// `surrogatepass` does (so this may not be valid UTF-8).
    Str(Box<[u8]>),
}

impl RequestId {
    /// The string, if this is a string id without lone surrogates.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RequestId::Str(b) => std::str::from_utf8(b).ok(),
            RequestId::Int(_) => None,
        }
    }
}

impl From<i64> for RequestId {
    fn from(v: i64) -> Self {
        RequestId::Int(v)
    }
}
impl From<&str> for RequestId {
    fn from(v: &str) -> Self {
        RequestId::Str(v.as_bytes().into())
    }
}
impl From<String> for RequestId {
    fn from(v: String) -> Self {
        RequestId::Str(v.into_bytes().into_boxed_slice())
    }
}

/// Integers as they are, strings quoted and escaped like Rust's `{:?}` of a
/// `str`, a lone surrogate as `\u{d800}`.
impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Int(i) => write!(f, "{i}"),
            RequestId::Str(b) => match std::str::from_utf8(b) {
                Ok(s) => write!(f, "{s:?}"),
                Err(_) => {
                    f.write_str("\"")?;
                    let mut rest: &[u8] = b;
                    while !rest.is_empty() {
                        let (valid, tail) = match std::str::from_utf8(rest) {
                            Ok(s) => (s, &rest[rest.len()..]),
                            Err(e) => {
                                let (a, t) = rest.split_at(e.valid_up_to());
                                (std::str::from_utf8(a).expect("valid prefix"), t)
                            }
                        };
                        write!(f, "{}", valid.escape_debug())?;
                        if tail.len() >= 3 {
                            // a surrogate: 0xED 0xA0..=0xBF 0x80..=0xBF
                            let cp = (u32::from(tail[0] & 0x0F) << 12)
                                | (u32::from(tail[1] & 0x3F) << 6)
                                | u32::from(tail[2] & 0x3F);
                            write!(f, "\\u{{{cp:x}}}")?;
                            rest = &tail[3..];
                        } else {
                            for byte in tail {
                                write!(f, "\\x{byte:02x}")?;
                            }
                            rest = &[];
                        }
                    }
                    f.write_str("\"")
                }
            },
        }
    }
}

impl RequestId {
    /// The id in a saved state: a JSON int or str. A string holding a lone
    /// surrogate cannot be written to JSON: `Value` error at `path`.
    pub fn to_value(&self, path: &crate::value::Path) -> crate::error::Result<crate::value::Value> {
        use crate::value::Value;
        match self {
            RequestId::Int(i) => Ok(Value::Int(*i as i128)),
            RequestId::Str(_) => self.as_str().map(Value::str).ok_or_else(|| {
                path.err(format!(
                    "{self} holds a lone surrogate, which a JSON state cannot carry"
                ))
            }),
        }
    }

    /// An id read from a saved state (an int within 64 bits or a str).
    pub fn from_value(
        v: &crate::value::Value,
        path: &crate::value::Path,
    ) -> crate::error::Result<RequestId> {
        use crate::value::Value;
        match v {
            Value::Int(i) => i64::try_from(*i)
                .map(RequestId::Int)
                .map_err(|_| path.err(format!("must fit in 64 bits, got {i}"))),
            Value::Str(s) => Ok(RequestId::from(s.as_str())),
            other => Err(path.err(format!("must be an int or a str, got {}", other.describe()))),
        }
    }

    /// The `request_id` field of a saved entry `f`, which must not repeat
    /// an id of `seen` (it is added there): a state's ids are unique.
    pub fn unique_field(
        f: &crate::value::Fields<'_>,
        seen: &mut std::collections::HashSet<RequestId>,
    ) -> crate::error::Result<RequestId> {
        let id = RequestId::from_value(f.required("request_id")?, &f.at("request_id"))?;
        if !seen.insert(id.clone()) {
            return Err(f
                .at("request_id")
                .err(format!("repeats request_id {id} (ids are unique)")));
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_order() {
        assert_eq!(RequestId::from(-3).to_string(), "-3");
        assert_eq!(RequestId::from("a\"b").to_string(), "\"a\\\"b\"");
        // "x" + U+D800 + "y" as surrogatepass UTF-8
        let lone = RequestId::Str(vec![b'x', 0xED, 0xA0, 0x80, b'y'].into());
        assert_eq!(lone.to_string(), "\"x\\u{d800}y\"");
        assert_eq!(lone.as_str(), None);
        assert_eq!(RequestId::from("q").as_str(), Some("q"));
        // ints before strings; strings by code point (U+D7FF < U+D800 < U+E000)
        let mut v = vec![
            RequestId::from("\u{e000}"),
            lone.clone(),
            RequestId::from("x\u{d7ff}"),
            RequestId::from(7),
            RequestId::from(i64::MIN),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                RequestId::from(i64::MIN),
                RequestId::from(7),
                RequestId::from("x\u{d7ff}"),
                lone,
                RequestId::from("\u{e000}"),
            ]
        );
    }
}
