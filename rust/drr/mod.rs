//! Deficit Round Robin across policy classes (ALGORITHMS.md section 2),
//! configured by Dynamo's router policy files.
//!
//! - the raw configuration document is a [`crate::value::Value`] (what
//!   YAML/JSON parse to), shared with saved fairness state;
//! - [`resolve`](mod@resolve): raw document -> resolved [`PolicyProfile`],
//!   validated once, here (as Dynamo's `policy_config.rs` does);
//! - [`config`]: the resolved profile (classes, buckets, families,
//!   thresholds, limits) and the classification of a request to its class;
//! - [`queue`]: the DRR arbitration, per-class heaps, tickets and limits;
//! - [`load`]: dispatchability from a worker-load snapshot;
//! - [`state`]: saving and restoring the arbitration state.

pub mod config;
pub mod load;
pub mod queue;
pub mod resolve;
pub mod state;

#[cfg(test)]
mod tests;

pub use crate::value::Value;
pub use config::{Bucket, BusyRule, ClassConfig, Limits, PolicyProfile, QueueOrder, Schema};
pub use load::{LoadSnapshot, MaxBatched};
pub use queue::{ClassStats, DrrQueue, Entry, PushArgs, Snapshot};
pub use resolve::{check_class, resolve};
